"""The diagnosis: from a window of frames to a Verdict (what limits the target, whether it is hung, the evidence
and the knob to turn), for a lone process and for a distributed job.

- stacks.py: what a sampled stack is doing (its activity) and a thread's profile over a window.
- evidence.py: the facts the rules read, gathered once per call from the recent frames.
- rules/: one module per bottleneck, each with its facts declared beside its rule; RULES in priority order.
- bottlenecks.py: the bottlenecks' facts gathered from the rules, for the verdict, the hung verdict and the TUI.
- hung.py: the verdict's body when nothing has moved; contention.py: CPUs shared with other work.
- verdict.py: diagnose(): choosing among the rules' candidates, holding a verdict, its confidence.
- job.py: diagnose_job(): a distributed job's verdict from each rank's.

Pure throughout: frames in, a verdict out, no I/O and no clock reads.
"""
