"""Predicted against measured: cases, measurements, validation grids, comparisons, calibration.

- :mod:`~scalelab.experiment.case`: a case's typed inputs and its prediction
- :mod:`~scalelab.experiment.measure`: compute, contention and links measured on this machine
- :mod:`~scalelab.experiment.validate`: grids of real runs against their predictions
- :mod:`~scalelab.experiment.compare`: the guidelines applied one at a time, measured
- :mod:`~scalelab.experiment.calibrate`: fitting the model, judged on held-out cases
"""
