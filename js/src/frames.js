// pandas and polars nodes in the class-free form (filled in from spec/neutral.md).
export const TABLE_TYPES = {};
