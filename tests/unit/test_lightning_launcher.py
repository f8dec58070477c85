"""Lightning's subprocess launcher on constructed process tables (its real jobs are in
tests/e2e/test_frameworks_e2e.py): ranks on a node other than 0, each DataLoader worker owned by its own rank,
the note worded around rank 0, and environments that are not Lightning's left to the other launchers."""

from __future__ import annotations

import json

from support.paths import REPO

from probes.frame import ROLE_DATALOADER_WORKER, ROLE_OTHER, ROLE_RANK, ProcessSample
from probes.jobs.facts import NoteContext, ProcessFacts
from probes.jobs.launchers import launcher_of_kind, parse_dist_env
from probes.jobs.layout import apply_layout, find_layout
from probes.sensors.process_facts import is_python_command

FIXTURE = json.loads((REPO / "tests" / "fixtures" / "launchers" / "lightning.json").read_text())


def facts_of(processes: list[dict]) -> list[ProcessFacts]:
    return [ProcessFacts(pid=p["pid"], ppid=p["ppid"], role=p.get("role", ROLE_OTHER), name=p["name"],
                         cmdline=tuple(p["cmdline"]), started=p.get("started", p["pid"]),
                         python=is_python_command(p["cmdline"]), env=parse_dist_env(p.get("environ", {})))
            for p in processes]


def test_children_variables_are_lightnings_and_a_rank_variable_is_not():
    env = parse_dist_env({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "41231"})
    assert (env.rank, env.local_rank, env.node_rank, env.world_size, env.master_port) == (1, 1, 0, 2, 41231)
    torch_style = parse_dist_env({"RANK": "1", "LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"})
    assert (torch_style.rank, torch_style.node_rank) == (1, None)  # RANK set: another launcher's rank


def test_a_second_node_numbers_its_ranks_after_the_first_nodes():
    processes = json.loads(json.dumps(FIXTURE["processes"]))
    for p in processes:
        if "NODE_RANK" in p["environ"]:
            p["environ"].update(NODE_RANK="1", WORLD_SIZE="4")
    layout = find_layout(200, facts_of(processes))
    assert layout.kind == "lightning"
    assert (layout.ranks, layout.world_size, layout.local_world_size) == (((200, 2), (210, 3)), 4, 2)


def test_each_dataloader_worker_belongs_to_its_own_rank():
    facts = facts_of(FIXTURE["processes"])
    layout = find_layout(200, facts)
    samples = [ProcessSample(pid=f.pid, ppid=f.ppid, name=f.name, role=f.role, cmdline=f.cmdline) for f in facts]
    by_pid = {s.pid: s for s in apply_layout(layout, samples, {f.pid: f for f in facts})}
    assert (by_pid[200].role, by_pid[200].rank, by_pid[200].local_rank, by_pid[200].world_size) == (ROLE_RANK, 0, 0, 2)
    assert (by_pid[210].role, by_pid[210].rank, by_pid[210].local_rank) == (ROLE_RANK, 1, 1)
    assert (by_pid[220].role, by_pid[220].owner_pid) == (ROLE_DATALOADER_WORKER, 200)
    assert (by_pid[230].role, by_pid[230].owner_pid) == (ROLE_DATALOADER_WORKER, 210)


def test_the_note_names_rank_zero_as_the_users_command():
    facts = facts_of(FIXTURE["processes"])
    layout = find_layout(200, facts)
    launcher = launcher_of_kind("lightning")

    def note(attached: int) -> str:
        return launcher.note(layout, NoteContext(attached_pid=attached, root_pid=200, attached_rank=None,
                                                 root_label="python", live_training=2,
                                                 processes={f.pid: f for f in facts}))

    assert note(200) == ("attached to python train.py --devices 2 (PID 200): a Lightning job whose rank 0 is this "
                         "process and starts the others as its children; watching 2 ranks on this node")
    assert note(210).startswith("attached to rank 1 (PID 210): watching the Lightning job under its rank 0, "
                                "python train.py --devices 2 (PID 200), 2 ranks on this node")


def test_a_python_launcher_whose_children_have_local_rank_zero_is_not_lightning():
    """A Python script starting LOCAL_RANK=0 and 1 itself (not training) is no Lightning rank 0."""
    processes = [
        {"pid": 10, "ppid": 1, "name": "python", "cmdline": ["python", "launch.py"]},
        {"pid": 11, "ppid": 10, "name": "python", "cmdline": ["python", "train.py"],
         "environ": {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}},
        {"pid": 12, "ppid": 10, "name": "python", "cmdline": ["python", "train.py"],
         "environ": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}},
    ]
    assert find_layout(10, facts_of(processes)).kind == "ranks"
