"""What the operator's controllers share: the API client, typed objects, kopf's indexes, the
work queue, expectations, names and conditions."""
