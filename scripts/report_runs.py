"""Before/after eval table for a set of runs (the logic lives in pods/analysis/runs_report.py). Usage:

python scripts/report_runs.py outputs/default/s0 outputs/default/s1 outputs/default/s2 > results/default_run.md
"""

from pods.analysis.runs_report import main

if __name__ == "__main__":
    main()
