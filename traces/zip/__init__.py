"""The traces zip: trace documents, the members kept ready, the zip writer."""
