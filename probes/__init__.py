"""gputop's headless engine: probes that read a target process, the Frame they produce, and the diagnosis.

Nothing in this package imports Textual; torch is imported only by the baseline probe, lazily.
"""

__version__ = "0.1.0"
