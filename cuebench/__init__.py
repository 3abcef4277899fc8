"""cuebench's core contract (trials, experiments, responses, experiment directories) and its command.

Every other package (``stimuli``, ``human_tasks``, ``experiment_server``, ``model_eval``,
``analysis``) depends on the contract modules here; they import no package of the project.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cuebench")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"
