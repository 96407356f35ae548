"""The ``s3q`` data source: batch and streaming, read and write."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from . import history_read, options, pieces


class S3QDataSource(DataSource):
    """``spark.read.format("s3q").load(url)`` and friends; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "s3q"

    def schema(self) -> str:
        parsed = options.parse(self.options)
        if history_read.wanted(parsed):
            return history_read.schema(history_read.flag(parsed, "payloads"))
        return pieces.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        parsed = options.parse(self.options)
        if history_read.wanted(parsed):
            return history_read.HistoryReader(parsed)
        from .snapshot_read import SnapshotReader

        return SnapshotReader(parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .batch_write import BatchWriter

        return BatchWriter(options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_read import ConsumeReader

        return ConsumeReader(options.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .stream_write import StreamWriter

        return StreamWriter(options.parse(self.options))
