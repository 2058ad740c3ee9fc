"""`retrieval audit`: near-duplicates, leaks between splits, likely label errors, outliers and confused classes.

Found over the FAISS kNN graph of the toolkit's own embedding (`findings.audit_embeddings`),
scored by cleanlab where it has the method (label issues, outliers, overlapping classes) and
written as CSVs and one HTML page (`report.write_report`), of the images `catalogue.read_catalogue` reads.
Needs the `audit` extra (cleanlab).
"""

__all__: list[str] = []  # the modules are the API: importing one loads no other (cleanlab, FAISS, sklearn)
