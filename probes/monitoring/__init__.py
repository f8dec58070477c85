"""The orchestration: one tick of every probe into a Frame (engine), the bounded History (history), the
Monitor that folds frames into views (monitor), every job of a node headless (node_watch) and a job merged across
nodes (cluster); below them all, the views they hand out and what every monitor offers a front end (view).
"""
