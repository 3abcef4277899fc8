"""Training algorithms behind one small interface: ``update(x, y) -> loss`` and ``predict(x)``.

A new method is one module here (like Brain-Score's plug-in folders): it subclasses ``Algorithm``
(``base``) and is listed under the ``cuebench.algorithms`` entry points, which put it in ``ALGORITHMS``
(``cuebench list algorithms``) and load it on first lookup; the job runner, logging and
model selection stay the same. Its settings are a typed ``Options`` model (pydantic: default from
the paper, bounds, help), validated when the algorithm is built, set from the command line with
``--algorithm-option NAME.KEY=VALUE`` (``options.parse_algorithm_options``) and recorded with every
result row. Here: ERM, pAdaIN, SagNet, InfoDrop (BiasBed, Kalischek et al. 2023, with BiasBed's
algorithm settings) and DiSTinguish (Wen et al. 2024). BiasBed's Stylized ERM, Debiased and DeepAugment train on
images made by pretrained image-to-image networks (AdaIN style transfer, a CAE or EDSR); none
of those weights exist offline, so they are not here -- they would be an ``Algorithm`` plus an
image transform fed to ``update``, and fit the same interface.
"""

from .base import (ALGORITHMS, AUTO_OPTIMIZER, OPTIMIZER_DEFAULTS, OPTIMIZERS, Algorithm, AlgorithmError,
                   AlgorithmOptions, OptimizerRequest, OptimizerSettings)
from .options import options_help, options_summary, parse_algorithm_options

__all__ = ["ALGORITHMS", "AUTO_OPTIMIZER", "OPTIMIZER_DEFAULTS", "OPTIMIZERS", "Algorithm", "AlgorithmError",
           "AlgorithmOptions", "OptimizerRequest", "OptimizerSettings", "options_help", "options_summary",
           "parse_algorithm_options"]
