"""The panes of the gputop screen, one module each (verdict, gpu, cpu, stacks, help), and what they share:
the immutable view they render (model), text formatters (text) and DataTable refilling (tables)."""
