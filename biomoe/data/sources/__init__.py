"""Where sequences come from: the reader protocol, FASTA files, prepared stores, the corpus, and
the registry that picks a reader for a path.

Kept apart from the code that turns a reader's contigs into training rows (windows, packing,
samplers, the loader in :mod:`biomoe.data`): a source knows nothing of rows, so a new format is a
new reader here and nothing else changes. Nothing is imported here: each command imports only the
reader it opens.
"""
