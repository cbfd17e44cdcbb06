"""The jobs, by the name `mqlens pipeline run JOB` takes. Each module has
`main(spark, source: SourceOptions, out: Path) -> dict[str, int]` (the counts its summary names);
content-search's also takes its query (`query=ContentQuery(...)`)."""

JOBS = {
    "projections": "pipeline.jobs.projections",
    "trace": "pipeline.jobs.trace",
    "timelines": "pipeline.jobs.timelines",
    "dlq-report": "pipeline.jobs.dlq_report",
    "key-index": "pipeline.jobs.key_index",
}

# Jobs that compute scheduled messages' due times: their summary names the delay table used.
DELAY_TABLE_JOBS = frozenset({"projections", "timelines"})

# Jobs `--follow` keeps current while the store grows (pipeline.follow).
FOLLOW_JOBS = frozenset({"dlq-report"})

# Jobs that also take a query (`mqlens pipeline run content-search --text ...`); the console
# starts the jobs above, and searches content on its own page.
QUERY_JOBS = {"content-search": "pipeline.jobs.content_search"}
ALL_JOBS = {**JOBS, **QUERY_JOBS}
