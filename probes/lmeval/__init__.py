"""lm-evaluation-harness beside our probes: its tasks as checkpoint probes (hook.py, run.py), our minimal
pairs as its tasks (tasks.py), its curves in our report (report.py). lm-eval is an optional extra
(``pip install -e .[lm-eval]``); only run.py imports it, when a task is run. docs/lm_eval.md."""

from probes.families import Family
from probes.lmeval.config import KIND, LmEvalConfig

FAMILY = Family(kind=KIND, key="lm_eval", config=LmEvalConfig, hook="probes.lmeval.hook:LmEvalHook",
                names=("lmeval_*",),  # probes.lmeval.hook.PREFIX
                table="probes.lmeval.report:lmeval_table", curves="probes.lmeval.report:write_lmeval_curves",
                section="probes.lmeval.report:lmeval_section",
                commands=(("lm-eval-tasks", "probes.lmeval.tasks:main",
                           "write lm-eval task YAMLs of our benchmarks (our scoring convention; docs/lm_eval.md)"),),
                probe="probes.lmeval.hook:LmEvalProbe", options=(
                    ("--lm-eval-task", "tasks", dict(action="append", metavar="TASK", help=(
                        "an lm-eval task, written as evals/step<N>/lmeval_<task>.parquet; repeat for several "
                        "(needs `pip install -e .[lm-eval]`; docs/lm_eval.md)"))),
                    ("--lm-eval-include-path", "include_path", dict(metavar="DIR", help=(
                        "local lm-eval task YAMLs (e.g. from `python -m probes lm-eval-tasks`)")))))
