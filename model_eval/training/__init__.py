"""Training studies: one base and its kinds (BiasBed-style runs, Kalischek et al. 2023).

``jobs`` is the training-study base (configuration, job, loop, per-epoch log, best-validation checkpoint,
out-of-distribution sets, table) and the registry of study kinds; ``factor_study`` (DiagViB-6), ``labelled``
(labelled image sets) and ``cue_study`` (cue-reliance fine-tuning) are its kinds. ``starting`` makes the model a
run starts from (from scratch, or from weights with a new head and optionally a frozen backbone); ``algorithms``
holds the training algorithms behind one ``update(x, y)`` step; ``executors`` runs jobs of any kind in a local
process pool, on Ray, or on Slurm via submitit. Every job writes its own rows; a kind's table is the union of them.
"""
