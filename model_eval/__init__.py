"""Models as observers: loading, preprocessing, decision rules and batched evaluation."""
