"""The report: results/README.md (the entry page), REPORT.md, and PR-1.md, PR-2.md, ... (the stacked
pull-request texts, one per line of patches/pull-requests.txt), rendered from the result documents and patches/.

    python -m report                       # or: nox -s report
    python -m report --check               # exit 1 when a committed page is not the rendering of the JSON and patches/
    python -m report.compare               # upstream vs decode_gather per (regime, layers, n); stdlib only

``model`` turns the documents into views, ``words`` chooses every word of a conclusion, ``render`` lays them
out with the jinja2 templates in ``report/templates/``, refusing a page where a line shows a figure and no series.
"""
