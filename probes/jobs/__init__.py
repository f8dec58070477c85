"""The job a PID belongs to: a distributed job's launcher and ranks, or the training process a launcher started.

gputop may be pointed at any process of a job: torchrun's agent, one of its ranks, the parent of
``torch.multiprocessing.spawn`` children, or a non-Python launcher (``bash train.sh``, ``uv run``, a container's
init) with the Python training process under it. The package owns what a job is, one concern a module:

* environment.py: what one process says about itself (its distributed variables, start time, command line);
* launchers/: one module per launcher behind one interface, and LAUNCHERS, the order they are asked in;
* facts.py: the types the launchers decide from and with; layout.py: the watched tree laid out each tick (a pure
  function over LAUNCHERS); root.py: which tree to watch for the PID named; gpus.py: which GPU each rank uses;
* tracker.py: the engine's JobTracker, which applies all of that to each tick's samples;
* follow.py: follow mode's census of the training jobs on the node; census.py: the same jobs described for
  the job picker and `gputop --list` (launcher, ranks, workers, GPUs, CPU%, age, command).

The /proc tree walk stays in probes/sensors/proctree.py; this package reads only single files of processes the walk
found. docs/jobs.md says what users see.
"""
