"""The diagnosis: from a window of frames to a Verdict (what limits the target, whether it is hung, the evidence
and the knob to turn), for a lone process and for a distributed job.

- stacks.py: what a sampled stack is doing (its activity) and a thread's profile over a window.
- evidence.py: the facts the rules read, gathered once per call from the recent frames; its parts: the look-back
  windows (windows.py), one frame's stacks summarised once (frame_stacks.py), the compiling over the compile
  look-backs (compile_history.py), the target's GPUs (gpu_summary.py), who held the GIL (gil.py).
- rules/: one module per bottleneck, each with its facts declared beside its rule; RULES in priority order.
- bottlenecks.py: the bottlenecks' facts gathered from the rules, for the verdict, the hung verdict and the TUI.
- hung.py: the verdict's body when nothing has moved; contention.py: CPUs shared with other work.
- verdict.py: diagnose(): choosing among the rules' candidates, holding a verdict, its confidence.
- verdict_lines.py: the kind of a verdict's line, carried on the line, so later steps never read its words.
- job.py: diagnose_job(): a distributed job's verdict from each rank's; rank_projection.py: a rank seen as a lone
  process.

Pure throughout: frames in, a verdict out, no I/O and no clock reads.
"""
