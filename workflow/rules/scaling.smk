# Multi-node data parallel out-of-core training, simulated at paper scale.


rule scaling:
    input:
        profile="results/profiles/analytic/{hw}/{model}.json",
        plans="results/plans/{hw}/{model}",
    output:
        "results/scaling/{hw}/{model}.csv",
    log:
        "logs/scaling/{hw}/{model}.log",
    params:
        hardware=config["hardware"],
        nodes=config["scaling"]["nodes"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/scaling.py"


rule scaling_table:
    input:
        scaling_tables,
    output:
        csv="results/tables/scaling.csv",
        md="results/tables/scaling.md",
        figure="results/figures/scaling.png",
    log:
        "logs/scaling_table.log",
    params:
        hardware=config["hardware"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/scaling_table.py"
