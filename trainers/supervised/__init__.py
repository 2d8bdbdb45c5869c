"""The supervised build of the tiny LMM (``trainers/sft.py`` is its entry point), one module per stage:
``args`` (flags, presets, checks), ``data`` (the corpus plan, the pre-rendered corpus, ``Records``, ``Batcher``),
``batches`` (``Trainee``: batches and the loss), ``loop`` (``Stage``, the schedule, ``train_stage``), ``quick_eval``
(held-out caption F1 during training) and ``checkpoints`` (the starting weights, ``train_state.pt``,
``sft_args.json``)."""
