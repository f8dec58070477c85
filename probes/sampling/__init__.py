"""Python stacks through py-spy: the binary (pyspy_binary), the sampler (pyspy) with its per-process windows
(process_sampler: each record window a pair of py-spys, which measures each sample's working or waiting) and
what they gather (sampler_results), its output (pyspy_output), the pure
policies it obeys (one process's rates: sampling_policy; who of a many-process tree samples when:
tree_sampling), and the pure aggregation of the stacks it returns (stacks).
"""
