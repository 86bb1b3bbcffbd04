"""The lab beside the runtime: what benchmarks, the reward fuzz run and the results index need, and a
training run does not. Not installed with pods (pyproject packages `pods*` only): scripts import it from the
repository root on PYTHONPATH (`PYTHONPATH=. python scripts/bench_gpu.py`; scripts/device/setup.sh puts
the root there on a lent machine).

    harness.py        shared pieces of the step benchmarks: random model and tokenizer, data, a timed
                      Trainer run, memory traces, device clocks
    fuzz.py           the adversarial corpus and timers behind scripts/fuzz_rewards.py and tests/reward/test_fuzz.py
    results_index.py  the rule scripts/check_results_index.py applies to results/README.md
    sft.py            the small chain-sum policies from scratch (tokenizer, Qwen2, SFT loop): the tiny model
                      (scripts/train_tiny_model.py) and the headline policy (scripts/build_headline_model.py)
"""
