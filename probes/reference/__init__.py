"""The reference step and what a run's pace is measured against: the GPT step `gputop probe` times
(gpt_probe, with its Llama and MoE models; torch imported lazily, inside functions), the machine's other load
while it runs (probe_load), the observed pace against the probe and the peak (baseline), and the inputs of that
comparison as they travel in recordings and snapshots (pace_inputs).
"""
