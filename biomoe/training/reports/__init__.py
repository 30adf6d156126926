"""What a run measures and reports beside the network's own loss.

Callbacks that put numbers next to the held-out bits/base (an order-k Markov baseline, the network
mixed with the repeat expert, bits/base per genome), the logged history that the end-of-run summary
reads and every checkpoint carries, the training-curve plots, and the writer of ``predict``'s
results. Nothing here imports the rest of training.
"""
