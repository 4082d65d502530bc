"""``python -m benchmarks.calibration``: the dense tables and the published MoE / long-context runs."""
from benchmarks.calibration.dense import main

main()
