"""Python stacks through py-spy: the binary and its windows (pyspy), its output (pyspy_output), the pure
policies it obeys (one process's rates: sampling_policy; who of a many-process tree samples when:
tree_sampling), and the pure aggregation of the stacks it returns (stacks).
"""
