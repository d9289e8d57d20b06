"""ELAGENT-style generated tasks as checkpoint probes (Li et al., "Challenging Large Language Models with
New Tasks", ../shared/papers/004_*.txt): Tasks 1 (``precedence``), 5 and 6 (``deduction``) generated, seeded,
from the paper's rules so no item can be in the training data; ``items`` holds the item and its layouts,
``score`` scores each item by its context pair and by its letter, ``hook`` runs that at every checkpoint,
``report`` draws both curves. Tasks 3-4 (Language A) are the minimal-pair benchmark ``elagent_word_order``
(probes/benchmarks/language_a.py). docs/elagent.md says what each curve can show.
"""

from probes.elagent.config import KIND, ElagentConfig
from probes.families import Family

FAMILY = Family(kind=KIND, key="elagent", config=ElagentConfig, hook="probes.elagent.hook:build",
                table="probes.elagent.report:elagent_table", curves="probes.elagent.report:write_elagent_curves",
                section="probes.elagent.report:elagent_section", tasks="probes.elagent.report:task_rows")
