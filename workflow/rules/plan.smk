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
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/compare_strategies.py"


rule speedup_table:
    input:
        strategy_tables,
    output:
        csv="results/tables/speedups.csv",
        summary=report("results/tables/speedup_summary.csv", caption="../report/speedup_summary.rst",
                       category="1. Single GPU (simulated)"),
        md="results/tables/speedups.md",
        figure=report("results/figures/speedups.png", caption="../report/speedups.rst",
                      category="1. Single GPU (simulated)"),
    log:
        "logs/speedup_table.log",
    params:
        hardware=config["hardware"],
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
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/gantt.py"
