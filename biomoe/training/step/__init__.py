"""The LightningModule and what one training step computes.

:class:`~biomoe.training.step.lightning_module.BioMoEModule` builds the model, computes the loss and
logs it, and hands the optimizer and schedule their settings; beside it are the pieces only the
step uses: the fp32 held-out mean (:mod:`~biomoe.training.step.held_out_metric`), the training
clock (:mod:`~biomoe.training.step.training_clock`), the state an exact resume needs
(:mod:`~biomoe.training.step.resume_state`), the whole step replayed as one CUDA graph
(:mod:`~biomoe.training.step.cuda_graph`), and the intra-op threads a CPU step runs on
(:mod:`~biomoe.training.step.cpu_threads`).
"""
