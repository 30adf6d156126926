"""Everything biomoe knows about checkpoints, in one package.

* :mod:`~biomoe.checkpoint.read` — open a checkpoint file (the one ``torch.load`` of a user's file);
* :mod:`~biomoe.checkpoint.verify` — integrity, structure, shapes and finite weights, before loading;
* :mod:`~biomoe.checkpoint.run_folder` — which checkpoint of a run folder to use;
* :mod:`~biomoe.checkpoint.hparams` — recorded hyper-parameters back into a ``ModelConfig``;
* :mod:`~biomoe.checkpoint.records` — what a checkpoint records about its training data;
* :mod:`~biomoe.checkpoint.save` — atomic single-file saves (Lightning ``CheckpointIO`` plugin);
* :mod:`~biomoe.checkpoint.distributed` — a distributed checkpoint's weights and its export to one file;
* :mod:`~biomoe.checkpoint.optimizer_state` — optimizer state between the master-weight and plain layouts.
"""
