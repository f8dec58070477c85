"""What gputop writes: the snapshot JSON (snapshot), the JSONL recording (recording), Prometheus metrics
(exporter), speedscope profiles (speedscope), and the 0600 files they go into (private_files).
"""
