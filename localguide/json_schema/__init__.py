"""JSON Schema → regex AST → byte DFA → Index (or → grammar, for what a DFA cannot hold).

    from localguide.json_schema import compile_json_schema
"""

from .schema import (
    SchemaError, UnsupportedSchemaError, compile_json_schema, format_inspection, inspect_schema, schema_to_regex,
)

__all__ = ["SchemaError", "UnsupportedSchemaError", "compile_json_schema", "format_inspection", "inspect_schema",
           "schema_to_regex"]
