"""instrumentation"""
