"""llm_proxy"""
