"""`retrieval audit`: near-duplicates, leaks between splits, likely label errors, outliers and confused classes.

Found over the FAISS kNN graph of the toolkit's own embedding (`findings.audit_embeddings`),
scored by cleanlab where it has the method (label issues, outliers, overlapping classes) and
written as CSVs and one HTML page (`report.write_report`). Needs the `audit` extra (cleanlab).
"""

from retrieval.audit.catalogue import Catalogue, read_catalogue
from retrieval.audit.findings import Findings, audit_embeddings
from retrieval.audit.report import write_report

__all__ = [
    "Catalogue",
    "Findings",
    "audit_embeddings",
    "read_catalogue",
    "write_report",
]
