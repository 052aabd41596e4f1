"""The report: results/README.md (the entry page), REPORT.md, PR-1.md and PR-2.md (the two stacked
pull-request texts), rendered from the result documents.

    python -m report                       # or: nox -s report
    python -m report --check               # exit 1 when a committed page is not the rendering of the JSON
    python -m report.compare               # upstream vs decode_gather per (regime, layers, n); stdlib only

``model`` turns the documents into views, ``words`` chooses every word of a conclusion, ``render`` lays them
out with the jinja2 templates in ``report/templates/``.
"""
