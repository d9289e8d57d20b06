"""ELAGENT-style generated tasks as checkpoint probes (Li et al., ../shared/papers/004_*.txt; docs/elagent.md),
generated, seeded, from the paper's rules so no item can be in the training data. Tasks 3-4 (Language A) are the
minimal-pair benchmark ``elagent_word_order`` (probes/benchmarks/language_a.py)."""

from probes.elagent.config import KIND, ElagentConfig
from probes.families import Family

FAMILY = Family(kind=KIND, key="elagent", config=ElagentConfig, hook="probes.elagent.hook:ElagentHook",
                names=("elagent",),
                table="probes.elagent.report:elagent_table", curves="probes.elagent.report:write_elagent_curves",
                section="probes.elagent.report:elagent_section", tasks="probes.elagent.report:task_rows")
