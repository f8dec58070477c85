"""The job found from any of its processes (probes/jobs/).

Pure unit tests of the environment parsing, the layout decision (ranks, mp.spawn, a launched main process),
owners and the GPU mapping; then real jobs (tests/targets/job_*.py): torchrun with two gloo ranks attached
through the agent, a rank and --process-only; mp.spawn; `bash train.sh`; torchrun restarting a failed rank.
"""

from __future__ import annotations

import dataclasses
import os

from support.fake_pynvml import GIB, FakeGpu, FakeNvml

from probes.frame import (
    ROLE_DATALOADER_WORKER,
    ROLE_LAUNCHER,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_RANK,
    ROLE_RESOURCE_TRACKER,
    GpuReading,
    ProcessSample,
    StackFrame,
    StacksReading,
    ThreadStack,
)
from probes.jobs import root as root_module
from probes.jobs import tracker as tracker_module
from probes.jobs.facts import ProcessFacts, RootChoice
from probes.jobs.gpus import environment_gpu_index, gpu_index_for
from probes.jobs.launchers import parse_dist_env
from probes.jobs.launchers.mp_spawn import SPAWN_MAIN_MARKER, is_spawn_child
from probes.jobs.launchers.torchrun import is_torchrun
from probes.jobs.layout import apply_layout, find_layout, stack_evidence
from probes.jobs.tracker import JobTracker
from probes.sensors.nvml import NvmlGpuProbe
from probes.sensors.process_facts import (
    NO_ENV,
    DistEnv,
    is_python_command,
    parse_environ,
    short_command,
    slurm_job_of,
    start_ticks,
)

# --- environment ------------------------------------------------------------------------------------------

TORCHRUN_ENV = {
    "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
    "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "2,3", "PATH": "/usr/bin",
}


def test_parse_environ_splits_nul_separated_entries():
    block = "A=1\0B=x=y\0EMPTY=\0junk\0\0"
    assert parse_environ(block) == {"A": "1", "B": "x=y", "EMPTY": ""}
    assert parse_environ(None) == {} and parse_environ("") == {}


def test_parse_dist_env_reads_torchruns_variables():
    env = parse_dist_env(TORCHRUN_ENV)
    assert env == DistEnv(rank=1, local_rank=1, world_size=2, local_world_size=2, group_rank=0, restart_count=0,
                          run_id="none", master_addr="127.0.0.1", master_port=29500, cuda_visible_devices="2,3")
    assert env.torchelastic


def test_parse_dist_env_malformed_numbers_read_as_unset():
    env = parse_dist_env({"RANK": "zero", "WORLD_SIZE": " 4 ", "MASTER_PORT": "", "CUDA_VISIBLE_DEVICES": ""})
    assert env.rank is None and env.world_size == 4 and env.master_port is None
    assert env.cuda_visible_devices == "", "an empty CUDA_VISIBLE_DEVICES hides every GPU: it is not unset"
    assert parse_dist_env({}) == NO_ENV and not NO_ENV.torchelastic


def test_the_slurm_job_rides_along_whichever_launcher_reads_the_ranks():
    """torchrun under srun: the ranks are torchrun's, the job id every node shares is Slurm's (JOBID.STEP)."""
    under_srun = {**TORCHRUN_ENV, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}
    env = parse_dist_env(under_srun)
    assert (env.rank, env.run_id, env.slurm_job) == (1, "none", "4242.0")
    assert slurm_job_of({"SLURM_JOB_ID": "4242"}) == "4242", "a batch script: no step"
    assert slurm_job_of({"SLURM_JOB_ID": " ", "SLURM_STEP_ID": "0"}) is None
    assert parse_dist_env(TORCHRUN_ENV).slurm_job is None
    assert parse_dist_env({"SLURM_JOB_ID": "7"}) == DistEnv(slurm_job="7"), "no rank: still the job it runs in"


def test_start_ticks_names_a_process():
    mine = start_ticks(os.getpid())
    assert isinstance(mine, int) and mine > 0
    assert start_ticks(os.getppid()) <= mine
    assert start_ticks(999_999_999) is None


def test_command_recognisers():
    assert is_python_command(["/usr/bin/python3.11", "train.py"])
    assert is_python_command(["bash", "x"], exe="/opt/venv/bin/python3")
    assert not is_python_command(["bash", "train.sh"], exe="/usr/bin/bash")
    assert not is_python_command(["uv", "run", "python", "train.py"])
    assert is_torchrun("pt_elastic", ["python"])
    assert is_torchrun("python3", ["/v/bin/python", "/v/bin/torchrun", "--nproc_per_node", "2", "t.py"])
    assert is_torchrun("python3", ["python", "-m", "torch.distributed.run", "t.py"])
    assert not is_torchrun("python3", ["python", "torchrun_notes.py"])
    assert is_spawn_child(["python", "-c", f"{SPAWN_MAIN_MARKER}; spawn_main(tracker_fd=5, pipe_handle=7)",
                           "--multiprocessing-fork"])
    assert short_command(["/usr/bin/python3.11", "train.py", "--lr", "3e-4"]) == "python3.11 train.py --lr 3e-4"
    assert short_command(["python", "x" * 100]).endswith("...") and len(short_command(["python", "x" * 100])) == 60


# --- the layout -------------------------------------------------------------------------------------------


def facts(pid, ppid, *, role=ROLE_OTHER, python=True, env=NO_ENV, started=None, name="python3", alive=True,
          spawn=False, waiting=False, cpu=None, cmdline=None) -> ProcessFacts:
    return ProcessFacts(pid=pid, ppid=ppid, role=role, name=name, alive=alive, started=started or pid,
                        python=python, env=env, spawn_child=spawn, waiting_for_child=waiting, cpu_seconds=cpu,
                        cmdline=cmdline or (("python3", "train.py") if python else (name,)))


def rank_env(rank, world=2, restart=0, run_id="job1", devices=None):
    return DistEnv(rank=rank, local_rank=rank, world_size=world, local_world_size=world, restart_count=restart,
                   run_id=run_id, cuda_visible_devices=devices)


def torchrun_tree(agent=10, shell_env=NO_ENV):
    """agent 10 -> ranks 11, 12 -> two DataLoader workers each (their rank's environment, inherited)."""
    r0, r1 = rank_env(0), rank_env(1)
    return [
        facts(agent, 1, role=ROLE_MAIN, name="pt_elastic", env=shell_env),
        facts(11, agent, env=r0), facts(12, agent, env=r1),
        facts(21, 11, role=ROLE_DATALOADER_WORKER, env=r0), facts(22, 11, role=ROLE_DATALOADER_WORKER, env=r0),
        facts(23, 12, role=ROLE_DATALOADER_WORKER, env=r1), facts(24, 12, role=ROLE_DATALOADER_WORKER, env=r1),
    ]


def test_torchrun_agent_is_the_launcher_of_its_ranks():
    layout = find_layout(10, torchrun_tree())
    assert layout.kind == "torchrun"
    assert layout.launcher_pid == 10 and layout.launchers == (10,)
    assert layout.ranks == ((11, 0), (12, 1)), "DataLoader workers inherit RANK but are not ranks"
    assert (layout.run_id, layout.world_size, layout.local_world_size) == ("job1", 2, 2)


def test_rank_variables_exported_by_the_shell_do_not_make_the_agent_a_rank():
    tree = torchrun_tree(shell_env=DistEnv(rank=0, world_size=2))
    tree = [facts(5, 1, python=False, name="bash", env=DistEnv(rank=0, world_size=2), role=ROLE_MAIN)] + [
        f if f.pid != 10 else facts(10, 5, name="pt_elastic", env=DistEnv(rank=0, world_size=2)) for f in tree]
    layout = find_layout(5, tree)
    assert layout.ranks == ((11, 0), (12, 1))
    assert layout.launcher_pid == 10 and set(layout.launchers) == {5, 10}


def test_ranks_under_a_script_without_torchelastic_are_kind_ranks():
    tree = [facts(5, 1, python=False, name="bash", role=ROLE_MAIN),
            facts(6, 5, env=DistEnv(rank=0, world_size=2)), facts(7, 5, env=DistEnv(rank=1, world_size=2))]
    layout = find_layout(5, tree)
    assert layout.kind == "ranks" and layout.ranks == ((6, 0), (7, 1)) and layout.launcher_pid == 5


def test_one_process_with_rank_zero_of_one_is_launched_not_a_job_of_ranks():
    tree = [facts(5, 1, python=False, name="bash", role=ROLE_MAIN), facts(6, 5, env=DistEnv(rank=0, world_size=1))]
    layout = find_layout(5, tree)
    assert layout.kind == "launched" and layout.main_pid == 6 and layout.ranks == ()


def test_a_rank_whose_launcher_is_not_visible_is_its_own_root():
    layout = find_layout(6, [facts(6, 1, role=ROLE_MAIN, env=DistEnv(rank=3, world_size=8))])
    assert layout.kind == "ranks" and layout.ranks == ((6, 3),)
    assert layout.launcher_pid is None and layout.launchers == ()


def test_a_lone_python_process_is_no_job():
    tree = [facts(6, 1, role=ROLE_MAIN), facts(7, 6, role=ROLE_DATALOADER_WORKER), facts(8, 6)]
    assert find_layout(6, tree) is None


def test_restarted_ranks_carry_their_restart_count_and_the_old_ones_stay_while_zombies():
    tree = torchrun_tree()[:3] + [facts(31, 10, env=rank_env(0, restart=1), started=100),
                                  facts(32, 10, env=rank_env(1, restart=1), started=101)]
    tree = [facts(f.pid, f.ppid, role=f.role, name=f.name, env=f.env, alive=f.pid not in (11, 12))
            if f.pid in (11, 12) else f for f in tree]
    layout = find_layout(10, tree)
    assert layout.ranks == ((11, 0), (31, 0), (12, 1), (32, 1))
    assert layout.world_size == 2


def spawn_tree(*, evidence_worker=False):
    spawn_cmd = ("python3", "-c", f"{SPAWN_MAIN_MARKER}; spawn_main(tracker_fd=5, pipe_handle=9)",
                 "--multiprocessing-fork")
    tracker = facts(41, 40, role=ROLE_RESOURCE_TRACKER, started=1)
    children = [facts(43, 40, spawn=True, started=3, cmdline=spawn_cmd), facts(42, 40, spawn=True, started=2,
                                                                               cmdline=spawn_cmd)]
    if evidence_worker:
        children.append(facts(44, 40, spawn=True, role=ROLE_DATALOADER_WORKER, started=4))
    workers = [facts(51, 42, role=ROLE_DATALOADER_WORKER), facts(52, 43, role=ROLE_DATALOADER_WORKER)]
    return [facts(40, 1, role=ROLE_MAIN), tracker, *children, *workers]


def test_mp_spawn_children_are_ranks_in_start_order():
    layout = find_layout(40, spawn_tree())
    assert layout.kind == "mp.spawn" and layout.launcher_pid == 40 and layout.launchers == (40,)
    assert layout.ranks == ((42, 0), (43, 1)), "rank = start order, not PID order"
    assert layout.world_size == 2
    assert find_layout(40, spawn_tree(), spawn_evidence={40: True}).kind == "mp.spawn"


def test_spawn_children_are_not_ranks_when_the_parents_stack_is_elsewhere_or_a_sibling_is_a_worker():
    assert find_layout(40, spawn_tree(), spawn_evidence={40: False}) is None
    assert find_layout(40, spawn_tree(evidence_worker=True)) is None
    assert find_layout(40, spawn_tree(evidence_worker=True), spawn_evidence={40: True}).kind == "mp.spawn"


def test_mp_spawn_ranks_stick_to_their_process():
    layout = find_layout(40, spawn_tree(), known_spawn_ranks={43: 0})
    assert dict(layout.ranks) == {43: 0, 42: 1}


def test_mp_spawn_under_a_shell():
    tree = [facts(39, 1, python=False, name="bash", role=ROLE_MAIN)] + [
        facts(40, 39) if f.pid == 40 else f for f in spawn_tree()]
    layout = find_layout(39, tree)
    assert layout.kind == "mp.spawn" and layout.launcher_pid == 40 and set(layout.launchers) == {39, 40}


def shell_tree():
    """bash 10 -> python train.py 12 -> two DataLoader workers; bash's `tee` 11 beside it."""
    return [facts(10, 1, python=False, name="bash", role=ROLE_MAIN), facts(11, 10, python=False, name="tee"),
            facts(12, 10), facts(13, 12, role=ROLE_DATALOADER_WORKER), facts(14, 12, role=ROLE_DATALOADER_WORKER)]


def test_the_python_process_under_a_shell_is_the_main_one():
    layout = find_layout(10, shell_tree())
    assert layout.kind == "launched" and layout.main_pid == 12
    assert layout.launcher_pid == 10 and layout.launchers == (10,) and layout.other_candidates == 0


def test_a_python_launcher_waiting_for_its_child_is_passed_through():
    tree = [facts(10, 1, python=False, name="uv", role=ROLE_MAIN), facts(11, 10, waiting=True, cpu=50.0),
            facts(12, 11, cpu=1.0)]
    layout = find_layout(10, tree)
    assert layout.main_pid == 12 and set(layout.launchers) == {10, 11}
    tree = [facts(11, 1, role=ROLE_MAIN, waiting=True), facts(12, 11)]
    assert find_layout(11, tree).main_pid == 12, "a Python root waiting for its Python child is its launcher"
    assert find_layout(11, [facts(11, 1, role=ROLE_MAIN), facts(12, 11)]) is None, "not waiting: it trains"
    tree = [facts(11, 1, role=ROLE_MAIN, waiting=True), facts(12, 11, python=False, name="nvidia-smi")]
    assert find_layout(11, tree) is None, "a training process running a tool is still the training process"


def test_a_shell_without_python_under_it_is_no_job():
    assert find_layout(10, [facts(10, 1, python=False, name="bash", role=ROLE_MAIN),
                            facts(11, 10, python=False, name="sleep")]) is None


def test_several_python_processes_the_busiest_is_main_and_stays():
    tree = [facts(10, 1, python=False, name="bash", role=ROLE_MAIN), facts(11, 10, cpu=2.0), facts(12, 10, cpu=90.0)]
    layout = find_layout(10, tree)
    assert layout.main_pid == 12 and layout.other_candidates == 1
    assert find_layout(10, tree, previous_main=11).main_pid == 11, "the choice holds while that process lives"
    tree[2] = facts(12, 10, cpu=90.0, alive=False)
    assert find_layout(10, tree).main_pid == 11, "a finished one gives way to a live one"


# --- applying the layout ----------------------------------------------------------------------------------


def samples_of(tree):
    return [ProcessSample(pid=f.pid, ppid=f.ppid, role=f.role, name=f.name, alive=f.alive) for f in tree]


def test_apply_layout_sets_roles_rank_fields_and_owners():
    tree = torchrun_tree()
    tree[2] = facts(12, 10, env=rank_env(1, devices="2,3"))
    layout = find_layout(10, tree)
    by_pid = {f.pid: f for f in tree}
    samples = {s.pid: s for s in apply_layout(layout, samples_of(tree), by_pid)}
    assert samples[10].role == ROLE_LAUNCHER and samples[10].owner_pid is None
    assert samples[11].role == ROLE_RANK and (samples[11].rank, samples[11].local_rank) == (0, 0)
    rank1 = samples[12]
    assert (rank1.role, rank1.rank, rank1.world_size, rank1.restart_count, rank1.cuda_visible_devices) == (
        ROLE_RANK, 1, 2, 0, "2,3")
    assert {pid: samples[pid].owner_pid for pid in (21, 22, 23, 24)} == {21: 11, 22: 11, 23: 12, 24: 12}
    assert all(samples[pid].role == ROLE_DATALOADER_WORKER for pid in (21, 22, 23, 24))


def test_apply_layout_for_a_launched_main_and_mp_spawn():
    tree = shell_tree()
    samples = {s.pid: s for s in apply_layout(find_layout(10, tree), samples_of(tree), {f.pid: f for f in tree})}
    assert [samples[p].role for p in (10, 11, 12)] == [ROLE_LAUNCHER, ROLE_OTHER, ROLE_MAIN]
    assert samples[13].owner_pid == 12 and samples[14].owner_pid == 12 and samples[11].owner_pid is None
    tree = spawn_tree()
    samples = {s.pid: s for s in apply_layout(find_layout(40, tree), samples_of(tree), {f.pid: f for f in tree})}
    assert samples[40].role == ROLE_LAUNCHER and samples[41].role == ROLE_RESOURCE_TRACKER
    assert (samples[43].rank, samples[43].local_rank, samples[43].world_size) == (1, 1, 2)
    assert samples[51].owner_pid == 42 and samples[41].owner_pid is None


def test_stack_evidence_reads_spawn_and_subprocess_waits():
    spawn_join = ThreadStack(pid=40, tid=40, name="MainThread", frames=(
        StackFrame("wait", "/usr/lib/python3.11/multiprocessing/connection.py"),
        StackFrame("ProcessContext.join", "/v/site-packages/torch/multiprocessing/spawn.py"),
        StackFrame("<module>", "launch.py")))
    training = ThreadStack(pid=50, tid=50, name="MainThread", frames=(StackFrame("step", "train.py"),))
    waiting = ThreadStack(pid=60, tid=60, name="MainThread", frames=(
        StackFrame("Popen._wait", "/usr/lib/python3.11/subprocess.py"), StackFrame("<module>", "launch.py")))
    helper = ThreadStack(pid=60, tid=61, name="Thread-1", frames=(
        StackFrame("Popen.wait", "/usr/lib/python3.11/subprocess.py"),))
    spawn, waits = stack_evidence(StacksReading(available=True, threads=(spawn_join, training, waiting, helper)))
    assert spawn == {40: True, 50: False, 60: False}
    assert waits == {60}
    assert stack_evidence(None) == ({}, set())


# --- which GPU ----------------------------------------------------------------------------------------------


def gpu_reading(gpus, aliases=None) -> GpuReading:
    probe = NvmlGpuProbe(FakeNvml(gpus))
    try:
        return probe.read(aliases or {})
    finally:
        probe.close()


def eight_gpus(**processes):
    return [FakeGpu(uuid=f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}", processes=processes.get(f"gpu{i}", []))
            for i in range(8)]


def rank_sample(pid=100, *, devices=None, local_rank=None, role=ROLE_RANK):
    return ProcessSample(pid=pid, ppid=1, role=role, name="python3", local_rank=local_rank,
                         cuda_visible_devices=devices)


def test_gpu_from_nvml_compute_processes_first():
    # NVML reports host PID 5100 for our PID 100 (a container): the probe maps it through the aliases.
    reading = gpu_reading(eight_gpus(gpu0=[(5100, 1 * GIB)], gpu5=[(5100, 30 * GIB)]), aliases={5100: 100})
    assert gpu_index_for(rank_sample(devices="2,3", local_rank=1), reading) == 5, \
        "the device it really uses (most memory), not the one its environment names"
    assert gpu_index_for(rank_sample(role=ROLE_OTHER), reading) == 5, "any process NVML lists"
    assert gpu_index_for(rank_sample(pid=5100, role=ROLE_OTHER), reading) is None, "host PIDs are not ours"


def test_gpu_from_the_environment():
    reading = gpu_reading(eight_gpus())
    assert gpu_index_for(rank_sample(devices="2,3", local_rank=1), reading) == 3
    assert gpu_index_for(rank_sample(devices="2,3", local_rank=0), reading) == 2
    assert gpu_index_for(rank_sample(devices="6", local_rank=0), reading) == 6, "one device per rank"
    assert gpu_index_for(rank_sample(devices="6", local_rank=3), reading) == 6
    assert gpu_index_for(rank_sample(devices=None, local_rank=4), reading) == 4
    assert gpu_index_for(rank_sample(devices="", local_rank=0), reading) is None, "no GPU visible"
    assert gpu_index_for(rank_sample(devices="2,3", local_rank=5), reading) is None
    assert gpu_index_for(rank_sample(devices="9", local_rank=0), reading) is None, "no such device"
    assert gpu_index_for(rank_sample(devices="GPU-3aaaaaaa-0000-0000-0000-000000000003,GPU-4aaa",
                                     local_rank=1), reading) == 4, "UUIDs and unique UUID prefixes"
    assert gpu_index_for(rank_sample(devices="GPU-", local_rank=0), reading) is None, "an ambiguous prefix"
    assert gpu_index_for(rank_sample(devices="MIG-1234", local_rank=0), reading) is None


def test_gpu_environment_fallback_is_for_ranks_and_an_explicit_main():
    reading = gpu_reading(eight_gpus())
    assert gpu_index_for(rank_sample(role=ROLE_MAIN, local_rank=None), reading) is None
    assert gpu_index_for(rank_sample(role=ROLE_MAIN, devices="7"), reading) == 7
    assert gpu_index_for(rank_sample(role=ROLE_DATALOADER_WORKER, devices="7", local_rank=0), reading) is None
    assert gpu_index_for(rank_sample(devices=None, local_rank=0), gpu_reading([])) is None, "a CPU-only node"


def test_gpu_environment_without_nvml():
    unavailable = GpuReading(available=False, reason="no driver")
    assert environment_gpu_index("1,2", 1, unavailable) == 2, "the user's setting is still the best answer"
    assert environment_gpu_index(None, 1, unavailable) is None
    assert environment_gpu_index("GPU-1234", 0, unavailable) is None
    assert environment_gpu_index("-1", 0, unavailable) is None


class FakeProc:
    """What JobTracker reads of each process (its environment, start time, whether it waits on a child), set by
    the test."""

    def __init__(self, monkeypatch, chosen: RootChoice) -> None:
        self.envs: dict[int, DistEnv] = {}
        self.waiting: set[int] = set()
        monkeypatch.setattr(root_module, "resolve_root", lambda pid: chosen)
        monkeypatch.setattr(tracker_module, "read_dist_env", lambda pid: self.envs.get(pid, NO_ENV))
        monkeypatch.setattr(tracker_module, "start_ticks", lambda pid: 1000 + pid)
        monkeypatch.setattr(tracker_module, "process_executable", lambda pid: None)
        monkeypatch.setattr(tracker_module, "main_thread_waits_for_child", lambda pid, children: pid in self.waiting)


def sample(pid, ppid, role=ROLE_OTHER, name="python3", alive=True, cmdline=("python3", "train.py")):
    return ProcessSample(pid=pid, ppid=ppid, role=role, name=name, cmdline=cmdline, alive=alive,
                         state="sleeping" if alive else "zombie")


def test_tracker_follows_a_restart_and_ends_with_its_launcher(monkeypatch):
    proc = FakeProc(monkeypatch, RootChoice(10, attached_rank=1))
    proc.envs = {11: rank_env(0), 12: rank_env(1), 21: rank_env(0), 31: rank_env(0, restart=1),
                 32: rank_env(1, restart=1)}
    tracker = JobTracker(12)
    agent = sample(10, 1, ROLE_MAIN, name="pt_elastic", cmdline=("python3", "-m", "torch.distributed.run"))
    job, samples = tracker.update([agent, sample(11, 10), sample(12, 10), sample(21, 11, ROLE_DATALOADER_WORKER)])
    by_pid = {s.pid: s for s in samples}
    assert (job.kind, job.root_pid, job.attached_pid, job.rank_pids, job.selected_pid) == (
        "torchrun", 10, 12, (11, 12), 12)
    assert by_pid[10].role == ROLE_LAUNCHER and by_pid[21].owner_pid == 11 and by_pid[12].restart_count == 0
    assert job.note == ("attached to rank 1 (PID 12): watching the torchrun job, 2 ranks on this node under "
                        "PID 10; --process-only watches PID 12 alone")

    job, samples = tracker.update([agent, sample(11, 10, alive=False), sample(12, 10, alive=False)])
    assert job.rank_pids == () and job.selected_pid is None
    assert [(s.role, s.rank) for s in samples[1:]] == [(ROLE_RANK, 0), (ROLE_RANK, 1)], "zombies keep their rank"

    job, samples = tracker.update([agent])  # reaped, the new attempt not started yet
    assert job.kind == "torchrun" and job.rank_pids == () and samples[0].role == ROLE_LAUNCHER

    job, samples = tracker.update([agent, sample(31, 10), sample(32, 10)])
    assert job.rank_pids == (31, 32) and job.selected_pid == 32, "the selection follows rank 1"
    assert [s.restart_count for s in samples[1:]] == [1, 1]

    ended = [dataclasses.replace(s, alive=False) for s in [agent, sample(31, 10), sample(32, 10)]]
    job, samples = tracker.update(ended)
    assert job.kind == "torchrun" and job.rank_pids == () and job.selected_pid is None
    assert [(s.role, s.rank, s.alive) for s in samples] == [
        (ROLE_LAUNCHER, None, False), (ROLE_RANK, 0, False), (ROLE_RANK, 1, False)]


def test_tracker_names_the_slurm_job_of_the_ranks(monkeypatch):
    proc = FakeProc(monkeypatch, RootChoice(10))
    proc.envs = {11: dataclasses.replace(rank_env(0), slurm_job="4242.0"),
                 12: dataclasses.replace(rank_env(1), slurm_job="4242.0")}
    agent = sample(10, 1, ROLE_MAIN, name="pt_elastic", cmdline=("python3", "-m", "torch.distributed.run"))
    job, _ = JobTracker(10).update([agent, sample(11, 10), sample(12, 10)])
    assert (job.kind, job.run_id, job.slurm_job) == ("torchrun", "job1", "4242.0")
    proc.envs = {11: rank_env(0), 12: rank_env(1)}
    job, _ = JobTracker(10).update([agent, sample(11, 10), sample(12, 10)])
    assert job.slurm_job is None


def test_tracker_python_that_ran_a_python_child_is_lone_again(monkeypatch):
    proc = FakeProc(monkeypatch, RootChoice(10))
    proc.waiting = {10}
    tracker = JobTracker(10)
    job, samples = tracker.update([sample(10, 1, ROLE_MAIN), sample(11, 10)])
    assert job.kind == "launched" and [s.role for s in samples] == [ROLE_LAUNCHER, ROLE_MAIN]
    assert tracker.unsampled_pids() == set(), "a Python launcher is still sampled"
    proc.waiting = set()
    job, samples = tracker.update([sample(10, 1, ROLE_MAIN)])
    assert job is None and samples[0].role == ROLE_MAIN


def test_tracker_skips_sampling_non_python_launchers(monkeypatch):
    FakeProc(monkeypatch, RootChoice(10))
    tracker = JobTracker(10)
    job, samples = tracker.update([sample(10, 1, ROLE_MAIN, name="bash", cmdline=("bash", "train.sh")),
                                   sample(11, 10), sample(12, 11, ROLE_DATALOADER_WORKER)])
    assert job.note == "attached to bash (PID 10): watching python3 train.py (PID 11) under it"
    assert tracker.unsampled_pids() == {10} and samples[2].owner_pid == 11


def test_process_only_flag_reaches_the_engine_config():
    from tui.cli import build_parser
    from tui.commands.shared import engine_config

    assert engine_config(build_parser().parse_args(["--pid", "1", "--process-only"])).process_only
    assert not engine_config(build_parser().parse_args(["--pid", "1"])).process_only


# --- real processes without torch: the tracker's reading of /proc ------------------------------------------

SLEEPER = "import time; time.sleep(600)"
