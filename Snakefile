# KARMA suite: reproduce the paper with `snakemake --cores all` (README.md).
# Rules live in workflow/rules/, scripts in workflow/scripts/, the config schema in
# workflow/schemas/; every rule logs to logs/ and writes its time to logs/benchmarks/.
from pathlib import Path

from karma.report.rule_times import summary

configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/runtime.smk"
include: "workflow/rules/scaling.smk"
include: "workflow/rules/large_nlp.smk"
include: "workflow/rules/reach.smk"


rule all:
    input:
        "results/tables/footprint.csv",
        "results/tables/footprint.md",
        "results/tables/measured_profiles.csv",
        "results/figures/footprint.png",
        "results/tables/speedups.md",
        expand("results/tables/speedups_{precision}.md",
               precision=[config.get("precision", {}).get("paper_variant", "bf16")]),
        expand("results/figures/gantt_{model}.png", model=config["gantt_model"]),
        "results/tables/measured_vs_predicted.md",
        "results/tables/scaling.md",
        "results/tables/distributed_validation.md",
        "results/tables/large_nlp.md",
        "results/tables/nlp_map.md",
        "results/tables/paper_claims.md",
        "results/tables/calibration.md",
        "results/tables/regression.md",
        "results/tables/reach.md",
        "results/figures/reach.png",
    default_target: True


# Where the run's time went, per rule, from every job's benchmark file (karma/report/rule_times.py).
onsuccess:
    table = summary("logs/benchmarks")
    Path("logs/rule_times.md").write_text(table + "\n")
    print(table)
