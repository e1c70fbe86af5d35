"""Actor-critics that learn from another policy's data with V-trace: APPO and IMPALA."""
