"""Every rank of a known world accounted for, where no launcher states this node's share (ranks started by hand):
probes/jobs/locality.py's reading of where the job runs (a loopback MASTER_ADDR, connections only to this
machine, no other node named) and of which process carrying a rank's environment is the rank rather than a helper
it left; world.py's ranks outside the watched tree; and the job verdict's words for a rank not running, a rank's
leftover, a rank outside the tree and a rank not on this node. (Real hand-started ranks:
tests/e2e/test_hand_started_ranks_e2e.py.)
"""

from __future__ import annotations

import dataclasses
import re
import socket

import pytest
from support.job_frames import (
    ALL_REDUCE,
    DDP_WAIT,
    RANK0,
    RANK1,
    SLOW_AUGMENT,
    count,
    job_frame,
    job_info,
    rank_proc,
    run_job,
    straggler_frames,
)

from probes.diagnosis.evidence import SAMPLES_REACH_S
from probes.frame import JobInfo, from_jsonable, to_jsonable
from probes.jobs import locality
from probes.jobs.facts import ProcessFacts
from probes.jobs.locality import (
    Locator,
    Placement,
    is_rank_itself,
    is_this_machine,
    machine_names,
    one_machine_reason,
    peer_host_and_port,
)
from probes.jobs.world import WorldAccount, WorldWatch, account_world
from probes.sensors.process_facts import ProcessStat, other_nodes_named
from probes.sensors.proctree import NodeProcess

NAMES = frozenset({"trainbox", "10.1.2.3", "fe80::1"})
LOCAL_PEERS = ["127.0.0.1:29500", "[::ffff:127.0.0.1]:44831", "127.0.0.1:53120"]
EXPECTED_HEAD = ("rank 1 of 2 is not running (the job runs only on this machine: MASTER_ADDR 127.0.0.1); rank 0 "
                 "waits for it in all_reduce: hung until the process group's timeout (30 min by gloo's default; no "
                 "rank uses a GPU)")


# --- this machine -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "::ffff:127.0.0.1", "localhost",
                                     "LOCALHOST", "trainbox", "10.1.2.3", "fe80::1%eth0", "::ffff:10.1.2.3"])
def test_loopback_and_this_machines_names_are_this_machine(address):
    assert is_this_machine(address, NAMES)


@pytest.mark.parametrize("address", ["192.0.2.7", "otherbox", "trainbox.example.org", "", "::ffff:192.0.2.7"])
def test_other_addresses_are_not(address):
    assert not is_this_machine(address, NAMES)


def test_the_real_machine_knows_its_own_hostname_and_addresses():
    names = machine_names()
    assert socket.gethostname().lower() in names
    assert is_this_machine(socket.gethostname(), names)


def test_peers_are_split_into_host_and_port():
    assert peer_host_and_port("127.0.0.1:29500") == ("127.0.0.1", 29500)
    assert peer_host_and_port("[::ffff:127.0.0.1]:443") == ("::ffff:127.0.0.1", 443)


def test_a_loopback_rendezvous_with_only_local_connections_is_one_machine():
    assert one_machine_reason("127.0.0.1", LOCAL_PEERS, None, NAMES) == "MASTER_ADDR 127.0.0.1"
    assert one_machine_reason("localhost", [], None, NAMES) == "MASTER_ADDR localhost"
    assert one_machine_reason("trainbox", ["10.1.2.3:29500"], None, NAMES) == "MASTER_ADDR trainbox, this machine"
    # A logger's HTTPS connection is no process group's.
    assert one_machine_reason("127.0.0.1", [*LOCAL_PEERS, "203.0.113.9:443"], None, NAMES) == "MASTER_ADDR 127.0.0.1"


def test_anything_that_points_elsewhere_or_cannot_be_read_leaves_it_untold():
    assert one_machine_reason("127.0.0.1", [*LOCAL_PEERS, "192.0.2.7:41234"], None, NAMES) is None  # a remote rank
    assert one_machine_reason("192.0.2.7", LOCAL_PEERS, None, NAMES) is None  # the rendezvous is another machine
    assert one_machine_reason("127.0.0.1", None, None, NAMES) is None  # sockets not readable (sock_diag denied)
    assert one_machine_reason("127.0.0.1", LOCAL_PEERS, "SLURM_NNODES=2", NAMES) is None  # another node named
    assert one_machine_reason(None, LOCAL_PEERS, None, NAMES) is None  # init_method in the code: no MASTER_ADDR


def test_variables_that_name_another_node():
    assert other_nodes_named({"SLURM_NNODES": "2"}) == "SLURM_NNODES=2"
    assert other_nodes_named({"PET_NNODES": "1:4"}) == "PET_NNODES=1:4"
    assert other_nodes_named({"NODE_RANK": "1"}) == "NODE_RANK=1"
    assert other_nodes_named({"SLURM_NNODES": "1", "NODE_RANK": "0", "GROUP_WORLD_SIZE": "1"}) is None
    assert other_nodes_named({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}) is None


# --- the rank itself, or a helper it left ---------------------------------------------------------------------


PYTHON = ("python", "train.py")


def itself(name="python", cmdline=PYTHON, pid=40, pgid=10, threads=1, parent_pgid=None, connections=False):
    parent = ProcessStat(ppid=1, pgid=parent_pgid, threads=1) if parent_pgid is not None else None
    return is_rank_itself(name, cmdline, ProcessStat(ppid=9, pgid=pgid, threads=threads), parent, pid,
                          lambda: connections)


def test_a_rank_started_as_a_program_is_the_rank():
    assert itself(pid=40, pgid=40)  # a shell's job (RANK=1 python train.py & in a terminal), or setsid
    assert itself(pgid=10, parent_pgid=10)  # a script's child, in its group
    assert itself(threads=5, connections=True)  # past init_process_group: its backend's threads


def test_what_a_gone_rank_left_is_never_the_rank():
    assert not itself(name="sleep", cmdline=("sleep", "600"), pid=40, pgid=40)
    assert not itself(name="pt_data_worker", threads=3)
    # Forked by the rank, one thread, adopted by init outside its group, holding the rank's connections.
    assert not itself(connections=True)


def test_an_orphan_that_holds_no_connection_yet_is_taken_for_the_rank():
    # A rank in a subshell that has exited, still importing: naming it "not running" would send a person after a
    # crash that never happened.
    assert itself(connections=False)


JOB_ENV = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "3"}


def machine(monkeypatch, table, connected=()):
    """This machine as find_ranks_here reads it: {pid: (name, cmdline, ppid, pgid, threads, environ)}, and the
    PIDs that hold established TCP connections."""
    monkeypatch.setattr(locality, "node_processes", lambda: {
        pid: NodeProcess(pid, row[2], row[0], row[1]) for pid, row in table.items()})
    monkeypatch.setattr(locality, "read_environ", lambda pid: table[pid][5] if pid in table else {})
    monkeypatch.setattr(locality, "read_process_stat", lambda pid: ProcessStat(
        ppid=table[pid][2], pgid=table[pid][3], threads=table[pid][4]) if pid in table else None)
    monkeypatch.setattr(locality, "established_peers",
                        lambda pids: ["127.0.0.1:29500"] if set(pids) & set(connected) else [])


def test_the_machine_is_searched_for_the_unseen_ranks_and_what_they_left(monkeypatch):
    rank = {**JOB_ENV, "RANK": "1"}
    machine(monkeypatch, {
        10: ("python", PYTHON, 9, 10, 5, {**JOB_ENV, "RANK": "0"}),  # rank 0, watched
        20: ("bash", ("bash",), 1, 20, 1, {}),
        21: ("python", PYTHON, 20, 20, 1, {**JOB_ENV, "RANK": "2"}),  # rank 2, started apart: its script's child
        30: ("sleep", ("sleep", "600"), 1, 5, 1, rank),  # what rank 1 left
        31: ("python", PYTHON, 1, 5, 1, rank),  # forked by rank 1, holding its sockets
        32: ("python", PYTHON, 1, 6, 1, {**JOB_ENV, "RANK": "1", "MASTER_PORT": "29501"}),  # another job's
    }, connected=(10, 31))
    running, leftovers = locality.find_ranks_here({**JOB_ENV, "RANK": "0"}, {1, 2}, tree={10})
    assert (running, leftovers) == ({2: 21}, {1: [30, 31]})
    placement = Locator().place([facts(10)], (1, 2), {10})
    assert placement.running_here == ((2, 21),)
    assert placement.leftovers == ((1, 31),), "only a leftover holding connections keeps the others waiting"


# --- the world ------------------------------------------------------------------------------------------------


def test_ranks_outside_the_watched_tree_are_neither_missing_nor_elsewhere():
    assert account_world(2, 2, None, seen={0}, outside={1}) == WorldAccount(outside=(1,))
    assert account_world(4, None, None, seen={0}, outside={2}) == WorldAccount(elsewhere=((1, 1), (3, 3)),
                                                                              outside=(2,))
    watch = WorldWatch()
    assert watch.unseen(3, [0]) == (1, 2)
    watch.update(3, 3, None, [0, 1])
    assert watch.unseen(3, [0]) == (2,)  # rank 1 was seen: gone since, it is the diagnosis's to remember


def facts(pid: int) -> ProcessFacts:
    return ProcessFacts(pid=pid, ppid=1, role="rank", name="python", cmdline=PYTHON, python=True)


def test_the_locator_reads_again_only_when_due(monkeypatch):
    reads = []

    def read(ranks, unseen, tree):
        reads.append(unseen)
        return Placement(one_machine="MASTER_ADDR 127.0.0.1")

    monkeypatch.setattr(Locator, "_read", staticmethod(read))
    now = [0.0]
    locator = Locator(clock=lambda: now[0])
    assert locator.place([facts(10)], (1,), {10}).one_machine == "MASTER_ADDR 127.0.0.1"
    locator.place([facts(10)], (1,), {10})
    assert len(reads) == 1
    now[0] = locality.RECHECK_S + 1
    locator.place([facts(10)], (1,), {10})
    locator.place([facts(10)], (1, 2), {10})  # other ranks unseen: read at once
    assert reads == [frozenset({1})] * 2 + [frozenset({1, 2})]


def test_the_locator_never_raises(monkeypatch):
    def broken(*_):
        raise OSError("netlink went away")

    monkeypatch.setattr(locality, "read_environ", broken)
    assert Locator().place([facts(10)], (1,), {10}) == Placement()


# --- the job's verdict ----------------------------------------------------------------------------------------


def hand_started(**kw) -> JobInfo:
    return dataclasses.replace(job_info(kind="ranks", ranks=(RANK0,)), world_size=2, local_world_size=None,
                               launcher_pid=None, **kw)


def waiting_frames(job: JobInfo, n: int = 8):
    return [job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)],
                      counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)], job=job) for i in range(n)]


def test_a_rank_not_running_on_a_one_machine_job_is_named_with_the_reason_in_the_first_line():
    job = run_job(waiting_frames(hand_started(missing_ranks=(1,), one_machine="MASTER_ADDR 127.0.0.1")))[-1]
    assert (job.finding, job.responsible_rank) == ("rank_exited", 1)
    assert job.verdict.evidence[0] == EXPECTED_HEAD
    assert (job.verdict.bottleneck, job.verdict.liveness) == ("comms_bound", "hung")
    assert job.verdict.advice[0].startswith("Find why rank 1 is not running: the terminal or log it was started")


def test_a_leftover_holding_the_ranks_connections_is_named_and_how_to_end_the_wait():
    info = hand_started(missing_ranks=(1,), one_machine="MASTER_ADDR 127.0.0.1", rank_leftovers=((1, 4242),))
    job = run_job(waiting_frames(info))[-1]
    assert job.verdict.evidence[:2] == (
        EXPECTED_HEAD, "PID 4242 carries rank 1's environment (a process rank 1 left running) and holds TCP "
                       "connections open")
    assert any(a.startswith("Ending PID 4242 closes the connections it holds: gloo then fails") for a in
               job.verdict.advice)


def test_where_locality_cannot_be_told_the_rank_is_not_on_this_node_and_said_so():
    job = run_job(waiting_frames(hand_started(ranks_elsewhere=((1, 1),))))[-1]
    assert job.finding == "single"
    assert job.verdict.evidence[1] == "rank 1 of 2 is not on this node"
    assert "not running" not in "\n".join(job.verdict.evidence)


def test_a_rank_running_outside_the_watched_tree_is_named_with_its_pid():
    job = run_job(waiting_frames(hand_started(ranks_outside=((1, 4243),))))[-1]
    assert job.verdict.evidence[1] == ("rank 1 of 2 runs on this machine outside the watched tree (PID 4243): "
                                       "gputop --pid 4243 watches it")


def test_ranks_on_other_nodes_are_said_once_even_while_a_verdict_is_held():
    multi_node = dataclasses.replace(job_info(), world_size=4, local_world_size=2, ranks_elsewhere=((2, 3),))
    # The straggler, then quiet seconds that age its samples out, then a few samples with the roles swapped: the
    # verdict is held, with the lines it had.
    frames = straggler_frames(10)
    aged_out = 10 + int(SAMPLES_REACH_S) + 1
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)]) for i in range(10, aged_out)]
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, SLOW_AUGMENT, n=1), count(RANK1, DDP_WAIT, n=1, idle=True)])
        for i in range(aged_out, aged_out + 3)]
    verdicts = run_job([dataclasses.replace(frame, job=multi_node) for frame in frames])
    assert any(line.startswith("holding:") for line in verdicts[-1].verdict.evidence)
    for verdict in verdicts:
        assert verdict.verdict.evidence.count("ranks 2–3 of 4 are not on this node") == 1, verdict.verdict.evidence


@pytest.mark.parametrize("info", [
    hand_started(missing_ranks=(1,), one_machine="MASTER_ADDR 127.0.0.1"),
    hand_started(missing_ranks=(1,)),
    hand_started(ranks_elsewhere=((1, 1),)),
    hand_started(ranks_outside=((1, 4243),)),
    dataclasses.replace(hand_started(), world_size=6, missing_ranks=(1,), ranks_outside=((2, 7),),
                        ranks_elsewhere=((3, 5),)),
])
def test_no_rank_of_a_known_world_is_left_unexplained(info):
    job = run_job(waiting_frames(info))[-1]
    words = "\n".join(job.verdict.evidence)
    named = {r.rank for r in job.ranks}
    for rank in range(info.world_size):
        if rank in named:
            continue
        ranges = [(int(a), int(b or a)) for a, b in re.findall(r"(\d+)(?:–(\d+))?", _rank_mentions(words))]
        assert any(first <= rank <= last for first, last in ranges), (rank, words)


def _rank_mentions(words: str) -> str:
    """The rank numbers and ranges the evidence names ("rank 1", "ranks 2–3, 5")."""
    return " ".join(re.findall(r"ranks? ((?:\d+(?:–\d+)?(?:, )?)+)", words))


def test_the_new_fields_round_trip():
    info = hand_started(missing_ranks=(1,), one_machine="MASTER_ADDR 127.0.0.1", rank_leftovers=((1, 4242),),
                        ranks_outside=((2, 7),))
    assert from_jsonable(JobInfo, to_jsonable(info)) == info
