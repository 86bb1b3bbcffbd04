"""Per-variant phase totals of a sweep (the logic lives in pods/analysis/phases.py). Usage:

python scripts/phase_totals.py outputs/multirun/cpu_greso > results/cpu_greso/phases.md
"""

from pods.analysis.phases import main

if __name__ == "__main__":
    main()
