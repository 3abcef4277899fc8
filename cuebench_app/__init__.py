"""The app layer: the ``cuebench`` command, the Python API, the demo and the workflows that join
several stages (texture synthesis against a model's features, the train-cues study).

It sits above every package of the data flow and is the only code that may import several of
them; the packages below it import nothing from here (``tests/system/test_layering.py``).
"""
