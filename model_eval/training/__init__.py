"""Training models from scratch on DiagViB-6 study directories (BiasBed-style, Kalischek et al. 2023).

``jobs`` turns a study directory into (study x pair x dataset sample x run) jobs and runs
one; ``algorithms`` holds the training algorithms behind one ``update(x, y)`` step;
``executors`` runs jobs in a local process pool, on Ray, or on Slurm via submitit. Every
job writes its own rows; ``training.csv`` is the union of them.
"""
