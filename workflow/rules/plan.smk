# Plan every strategy on every paper-size model and simulate it on the Hardware;
# aggregate KARMA's speedups; draw the simulated timelines of one model.


rule compare_strategies:
    input:
        profile="results/profiles/analytic/{hw}/{model}.json",
    output:
        csv="results/strategies/{hw}/{model}.csv",
        plans=directory("results/plans/{hw}/{model}"),
    log:
        "logs/compare_strategies/{hw}/{model}.log",
    benchmark:
        "logs/benchmarks/compare_strategies/{hw}/{model}.tsv",
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/compare_strategies.py"


rule speedup_table:
    input:
        strategies=strategy_tables,
        # the model's measured error, against which a margin is a win or a tie (none when nothing is measured)
        runtime=lambda wc: ["results/tables/measured_vs_predicted.csv"] if runtime_tables(wc) else [],
    output:
        csv="results/tables/speedups.csv",
        summary=report("results/tables/speedup_summary.csv", caption="../report/speedup_summary.rst",
                       category="1. Single GPU (simulated)"),
        md="results/tables/speedups.md",
        figure=report("results/figures/speedups.png", caption="../report/speedups.rst",
                      category="1. Single GPU (simulated)"),
    log:
        "logs/speedup_table.log",
    benchmark:
        "logs/benchmarks/speedup_table.tsv",
    params:
        hardware=config["hardware"],
        paper_models=config["speedup_models"],
        precision=config.get("precision", {}).get("paper", "fp32"),
    conda:
        "../../environment.yml"
    script:
        "../scripts/speedup_table.py"


rule speedup_table_precision:
    # The same six-model table in another precision (config `precision: paper_variant`), from the same
    # rules on profiles labelled `<hw>+<precision>`.
    input:
        strategies=variant_strategy_tables,
    output:
        csv="results/tables/speedups_{precision}.csv",
        summary=report("results/tables/speedup_summary_{precision}.csv", caption="../report/speedup_summary.rst",
                       category="1. Single GPU (simulated)"),
        md="results/tables/speedups_{precision}.md",
        figure=report("results/figures/speedups_{precision}.png", caption="../report/speedups.rst",
                      category="1. Single GPU (simulated)"),
    wildcard_constraints:
        precision="fp32|fp16|bf16",
    log:
        "logs/speedup_table_{precision}.log",
    benchmark:
        "logs/benchmarks/speedup_table_{precision}.tsv",
    params:
        hardware=config["hardware"],
        precision=lambda wc: wc.precision,
    conda:
        "../../environment.yml"
    script:
        "../scripts/speedup_table.py"


rule gantt:
    input:
        profile=f"results/profiles/analytic/{HARDWARE}/{{model}}.json",
        plans=f"results/plans/{HARDWARE}/{{model}}",
    output:
        report("results/figures/gantt_{model}.png", caption="../report/gantt.rst",
               category="1. Single GPU (simulated)"),
    log:
        "logs/gantt/{model}.log",
    benchmark:
        "logs/benchmarks/gantt/{model}.tsv",
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/gantt.py"
