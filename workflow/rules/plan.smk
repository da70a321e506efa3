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
        summary="results/tables/speedup_summary.csv",
        md="results/tables/speedups.md",
        figure="results/figures/speedups.png",
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
        "results/figures/gantt_{model}.png",
    log:
        "logs/gantt/{model}.log",
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/gantt.py"
