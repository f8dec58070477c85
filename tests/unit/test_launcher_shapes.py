"""Launch shapes that a launcher gputop already knows finds correctly (tests/fixtures/launchers/shapes/: the
deprecated torch.distributed.launch, torchrun under `uv run` and `conda run`), and the note naming what the user
ran for every launcher fixture: "accelerate launch job", "deepspeed job", never "torchrun" for accelerate.
"""

from __future__ import annotations

import json

import pytest
from support.launcher_fixtures import FIXTURES, fixture_attachment, fixture_facts, load_fixture
from support.paths import REPO

from probes.jobs.facts import NoteContext
from probes.jobs.launchers import LAUNCHERS, launcher_label, launcher_of_kind, parse_dist_env
from probes.jobs.launchers.mpi import Mpi
from probes.jobs.layout import find_layout
from probes.jobs.root import resolve_root

SHAPES = sorted((FIXTURES / "shapes").glob("*.json"))


def root_note(fixture: dict, facts) -> str:
    """The note when gputop is attached to the fixture's root, worded as the tracker words it."""
    layout = find_layout(fixture["root_pid"], facts)
    by_pid = {f.pid: f for f in facts}
    root = by_pid[fixture["root_pid"]]
    context = NoteContext(attached_pid=root.pid, root_pid=root.pid, attached_rank=None,
                          root_label=launcher_label(root.name, root.cmdline),
                          live_training=len(layout.training_pids), processes=by_pid)
    return launcher_of_kind(layout.kind).note(layout, context)


@pytest.mark.parametrize("path", SHAPES, ids=[p.stem for p in SHAPES])
def test_a_launch_shape_is_found_by_the_launcher_that_knows_it(path):
    fixture = json.loads(path.read_text())
    facts = fixture_facts(fixture)
    layout = find_layout(fixture["root_pid"], facts)
    assert layout is not None and layout.kind == fixture["kind"], fixture["about"]
    expect = fixture["expect"]
    assert (layout.launcher_pid, [list(r) for r in layout.ranks], layout.main_pid) == (
        expect["launcher_pid"], expect["ranks"], expect["main_pid"])
    attachment = fixture_attachment(fixture, facts)
    choice = next((c for launcher in LAUNCHERS if (c := launcher.root_for(attachment)) is not None), None)
    assert (choice.root_pid if choice is not None else None) == fixture["attach"]["root_pid"]
    assert root_note(fixture, facts) == fixture["note"]


@pytest.mark.parametrize(("kind", "words"), [
    ("accelerate", "attached to accelerate launch (PID 20): watching the accelerate launch job, 2 ranks"),
    ("deepspeed", "attached to deepspeed (PID 30): watching the deepspeed job, 2 ranks"),
    ("mpirun", "attached to mpirun (PID 40): watching the mpirun job, 2 ranks"),
    ("torchrun", "attached to torchrun (PID 10): watching the torchrun job, 2 ranks"),
])
def test_the_note_names_the_launcher_the_user_typed(kind, words):
    fixture = load_fixture(kind)
    assert root_note(fixture, fixture_facts(fixture)).startswith(words)


def test_deepspeed_ranks_read_its_local_size_and_node_number():
    env = parse_dist_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_SIZE": "2", "CROSS_RANK": "1",
                          "CROSS_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"})
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size, env.group_rank) == (3, 1, 4, 2, 1)


def test_mpi_ranks_read_open_mpi_and_mpich_numbers_but_leave_srun_pmi_tasks_to_slurm():
    ompi = parse_dist_env({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                           "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    assert (ompi.rank, ompi.local_rank, ompi.world_size, ompi.local_world_size) == (5, 1, 8, 4)
    mpich = parse_dist_env({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"})
    assert (mpich.rank, mpich.local_rank, mpich.world_size, mpich.local_world_size) == (2, 0, 4, 2)
    # srun --mpi=pmi2: Slurm is the PMI server and its task numbers are Slurm's to read.
    assert Mpi().rank_variables({"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "1"}) is None
    # mpirun in a batch script: each rank inherits the batch shell's SLURM_PROCID=0; MPI's number is the rank.
    assert Mpi().rank_variables({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                                 "SLURM_PROCID": "0"}).rank == 1
    assert Mpi().rank_variables({"PMI_RANK": "3", "PMI_SIZE": "4", "SLURM_PROCID": "0"}).rank == 3


def test_a_process_that_only_names_accelerate_or_deepspeed_is_no_launcher():
    for cmdline in (["vim", "accelerate"], ["python", "train.py", "accelerate", "launch"],
                    ["/venv/bin/python", "/venv/bin/accelerate", "config"], ["grep", "deepspeed.launcher.launch"]):
        assert launcher_label("x", cmdline) == "x", cmdline


def test_an_unreadable_pid_resolves_to_itself():
    assert resolve_root(2**22 + 12345).root_pid == 2**22 + 12345
    assert REPO.exists()
