"""What the tests share, one module per kind of thing; no test module imports another (tests/unit/test_test_hygiene.py).

- paths, processes: where the repository and the targets are; waiting on a condition, killing a process tree,
  starting a target that logs to a file, a free port.
- cli: the gputop command run as a user runs it.
- frames, job_frames, cluster_frames, compiled_code, nanogpt_case: constructed frames and stacks (one process;
  a 2-rank torchrun job; ranks on several nodes; torch.compile's code as py-spy showed it; the nanoGPT GPT-2 XL
  seed case on an H200) for the unit tests of the diagnosis, the monitor, the exporter and the screens.
- launcher_fixtures: the constructed process tables in tests/fixtures/launchers/.
- pilot, tmux: the Textual app driven in-process by a Pilot; the real command in a real terminal.
- real_jobs, picker_jobs, jobwatch, recorded: real jobs started and watched (by an Engine, by the command).
- fake_pynvml, fake_pyspy: stand-ins for NVML and the py-spy binary.
- h200: the real H200 runs in tests/fixtures/h200/ as files gputop reads.
- ns_nodes, ssh_nodes, slurm_cluster: namespaced test nodes, an sshd in each, a real Slurm cluster.

Imported as ``support.<module>``: tests/ holds a conftest.py and no __init__.py, so pytest (its default
``prepend`` import mode) puts tests/ first on sys.path, whether it runs from the repository root or from CI's
fresh clone. Nothing here is imported as ``tests.support``: that would load a second copy of each module.
"""
