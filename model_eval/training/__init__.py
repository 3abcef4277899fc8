"""Training models on DiagViB-6 study directories and labelled sets (BiasBed-style, Kalischek et al. 2023).

``starting`` makes the model a run starts from (from scratch, or from weights with a new head and
optionally a frozen backbone); ``jobs`` turns a study directory into (study x pair x dataset sample x run) jobs and runs
one; ``algorithms`` holds the training algorithms behind one ``update(x, y)`` step;
``executors`` runs jobs in a local process pool, on Ray, or on Slurm via submitit. Every
job writes its own rows; ``training.csv`` is the union of them.
"""
