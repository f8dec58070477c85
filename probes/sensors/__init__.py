"""Readers of the systems outside gputop, one module each: the /proc process tree (proctree, with proc_readers
for each process's files), one process's small files (textfiles), cgroups (cgroup), NVML (nvml), /proc/stat
(hostcpu), sockets (tcpinfo), Slurm's commands (slurm), the job's log (progress) and PyTorch's Flight Recorder
(flight_recorder). Each returns frozen dataclasses from probes.frame with None for what it cannot read, and never
raises into its caller.
"""
