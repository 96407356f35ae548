"""The log on storage: its objects' bytes (segments), the operations they carry, message
ids, stamps, staged payloads and run tables."""
