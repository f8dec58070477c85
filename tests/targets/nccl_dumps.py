"""Flight Recorder dumps as ProcessGroupNCCL pickles them (the keys torch's fr_trace reads; checked by running
fr_trace on them in tests/unit/test_flight_recorder.py): used by those tests and by the fake NCCL rank
tests/targets/fr_pipe_rank.py, which writes one when its debug-info pipe is written."""

from __future__ import annotations

T0_NS = 1_795_608_000_000_000_000  # 2026-11-25 12:00:00 UTC
GRAD_ELEMENTS = 6_553_600  # float32: 26,214,400 bytes, "26 MB"


def nccl_entry(seq: int, state: str, *, retired: bool, created_s: float, op: str = "all_reduce") -> dict:
    """One entry as ProcessGroupNCCL's Flight Recorder pickles it (the keys fr_trace's loader reads)."""
    return {
        "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
        "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": T0_NS + int(created_s * 1e9),
        "duration_ms": None, "input_sizes": [[GRAD_ELEMENTS]], "input_dtypes": ["Float"],
        "output_sizes": [[GRAD_ELEMENTS]], "output_dtypes": ["Float"], "state": state,
        "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": retired,
        "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2950},
                   {"name": "train_step", "filename": "train.py", "line": 88}],
    }


def nccl_dump(last_entered: int, last_completed: int, first: int = 405) -> dict:
    """A rank's dump: collectives first..last_entered, those up to last_completed completed and retired."""
    entries = [nccl_entry(seq, "completed" if seq <= last_completed else "started", retired=seq <= last_completed,
                          created_s=seq - first) for seq in range(first, last_entered + 1)]
    return {
        "version": "2.10", "comm_lib_version": "2.21.5", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                                           "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {"0": {"last_enqueued_collective": last_entered, "last_started_collective": last_entered,
                            "last_completed_collective": last_completed}},
        "entries": entries, "nccl_comm_state": {},
    }
