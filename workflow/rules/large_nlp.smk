# Large NLP models (KARMA Sec. VI-D): out-of-core data parallel vs Megatron hybrid model
# parallel, simulated at paper scale; a what-if on newer machines; the Megatron cost model
# checked against real tensor-parallel MPI runs on this machine.


rule large_nlp:
    input:
        profile="results/profiles/analytic/{hw}/{model}.json",
        plans="results/plans/{hw}/{model}",
    output:
        "results/large_nlp/{hw}/{model}.csv",
    log:
        "logs/large_nlp/{hw}/{model}.log",
    benchmark:
        "logs/benchmarks/large_nlp/{hw}/{model}.tsv",
    params:
        hardware=config["hardware"],
        nodes=config["large_nlp"]["nodes"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/large_nlp.py"


rule large_nlp_whatif:
    output:
        "results/large_nlp/whatif.csv",
    log:
        "logs/large_nlp_whatif.log",
    benchmark:
        "logs/benchmarks/large_nlp_whatif.tsv",
    params:
        hardware=config["large_nlp"]["whatif_hardware"],
        models=config["large_nlp"]["models"],
        precision=config.get("precision", {}).get("whatif", "fp32"),
        nodes=config["large_nlp"]["whatif_nodes"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/large_nlp_whatif.py"


rule nlp_map:
    output:
        "results/nlp_map/{precision}/{model}.csv",
    log:
        "logs/nlp_map/{precision}/{model}.log",
    benchmark:
        "logs/benchmarks/nlp_map/{precision}/{model}.tsv",
    params:
        hardware=config["hardware"],
        nodes=config["large_nlp"]["map"]["nodes"],
        max_batch=config["large_nlp"]["map"]["max_batch"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/nlp_map.py"


rule nlp_map_table:
    input:
        nlp_maps,
    output:
        csv=report("results/tables/nlp_map.csv", caption="../report/nlp_map_table.rst",
                   category="4. Large NLP: data parallel vs model parallel"),
        md="results/tables/nlp_map.md",
        figure=report("results/figures/nlp_map.png", caption="../report/nlp_map.rst",
                      category="4. Large NLP: data parallel vs model parallel"),
    log:
        "logs/nlp_map_table.log",
    benchmark:
        "logs/benchmarks/nlp_map_table.tsv",
    params:
        hardware=config["hardware"],
        nodes=config["large_nlp"]["map"]["nodes"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/nlp_map_table.py"


rule validate_tensor_parallel:
    output:
        "results/tp_validation/{model}.csv",
    log:
        "logs/validate_tensor_parallel/{model}.log",
    benchmark:
        "logs/benchmarks/validate_tensor_parallel/{model}.tsv",
    params:
        batch=config["large_nlp"]["validate"]["global_batch"],
        steps=config["large_nlp"]["validate"]["steps"],
    threads: config["large_nlp"]["validate"]["ranks"]
    # measured jobs first: one at a time, they are the run's longest chain, and the other jobs fill the
    # other core meanwhile (snakemake runs the higher priority first)
    priority: 10
    resources:
        measuring=1,
        mpi="mpiexec",
        tasks=config["large_nlp"]["validate"]["ranks"],
    conda:
        "../../environment.yml"
    shell:
        "timeout 600 {resources.mpi} -n {resources.tasks} python -m karma.experiments.validate_tensor_parallel {wildcards.model} "
        "--global-batch {params.batch} --steps {params.steps} --out {output} > {log} 2>&1"


rule large_nlp_table:
    input:
        tables=large_nlp_tables,
        whatif="results/large_nlp/whatif.csv",
        validation=tp_validations,
    output:
        csv="results/tables/large_nlp.csv",
        summary=report("results/tables/large_nlp_summary.csv", caption="../report/large_nlp_summary.rst",
                       category="4. Large NLP: data parallel vs model parallel"),
        validation=report("results/tables/tp_validation.csv", caption="../report/tp_validation.rst",
                          category="4. Large NLP: data parallel vs model parallel"),
        md="results/tables/large_nlp.md",
        figure=report("results/figures/large_nlp.png", caption="../report/large_nlp.rst",
                      category="4. Large NLP: data parallel vs model parallel"),
        whatif=report("results/figures/large_nlp_whatif.png", caption="../report/large_nlp_whatif.rst",
                      category="4. Large NLP: data parallel vs model parallel"),
    log:
        "logs/large_nlp_table.log",
    benchmark:
        "logs/benchmarks/large_nlp_table.tsv",
    params:
        hardware=config["hardware"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/large_nlp_table.py"
