"""The panes of the gputop screen, one module each (verdict, gpu, cpu, ranks, stacks, help), and what they
share: text formatters (text) and the DataTable base with j/k and a column that fits the pane (tables). Each
pane renders the immutable MonitorView (probes/view/monitor_view.py) it is handed."""
