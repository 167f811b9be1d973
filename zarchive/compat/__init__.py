"""Front ends for code written for other libraries: change an import, keep the code.

- `zarchive.compat.zanj`: ZANJ's `ZANJ`, `zanj.torchutil` and `zanj.loading` over zarchive.
"""
