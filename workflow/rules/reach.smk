# Reach (issue 16): the largest batch each strategy trains on the Hardware's device memory and the
# speed it keeps there, simulated on the paper's models, beside the published reach of other systems.

REACH = {"models": config["speedup_models"], "multiples": [1, 2, 4, 8], "granularity": ["block"],
         "limit_factor": 64, "karma_work": 0.1, "karma_confirm": True, **config.get("reach", {})}


rule reach:
    output:
        csv="results/tables/reach.csv",
        md="results/tables/reach.md",
        granularity_csv="results/tables/reach_granularity.csv",
        figure="results/figures/reach.png",
    log:
        "logs/reach.log",
    benchmark:
        "logs/benchmarks/reach.tsv",
    params:
        hardware=config["hardware"],
        strategies=config["strategies"],
        reach=REACH,
        precision=config.get("precision", {}).get("paper", "fp32"),
    conda:
        "../../environment.yml"
    script:
        "../scripts/reach_table.py"
