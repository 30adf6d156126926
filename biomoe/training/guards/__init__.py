"""Callbacks that guard a run: its length and time, its health, and what it leaves when it stops.

Training length in passes over the data (:mod:`~biomoe.training.guards.training_length`), a
wall-clock budget (:mod:`~biomoe.training.guards.time_budget`) and limit
(:mod:`~biomoe.training.guards.time_limit`); non-finite values and router collapse
(:mod:`~biomoe.training.guards.health`); a resumable checkpoint on SIGTERM and Ctrl-C with the line
that says how to resume (:mod:`~biomoe.training.guards.preemption`,
:mod:`~biomoe.training.guards.stop_report`), and the best checkpoint without optimizer state
(:mod:`~biomoe.training.guards.best_checkpoint`).
"""
